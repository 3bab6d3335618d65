"""Request and reply models of the REST API, one family per resource (frontend-facing: item cards, not tool calls)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MAX_TEXT = 4000
"""Most characters in one user message."""
MAX_MESSAGES = 64
"""Most messages in one OpenAI-style request."""

Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT)]
BudgetMs = Annotated[float, Field(gt=0, le=120_000, description="Latency budget for this request, ms.")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ShoppingConstraints(_Strict):
    """Filters the frontend applies to every item the agent may show."""

    category: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = Field(
        None, max_length=8, description="Category path prefix, root first.")
    price_max: float | None = Field(None, ge=0)
    price_min: float | None = Field(None, ge=0)
    attributes: dict[Annotated[str, StringConstraints(min_length=1, max_length=64)],
                     Annotated[str, StringConstraints(max_length=200)]] | None = Field(None, max_length=16)
    in_stock: bool = True

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class SessionCreate(_Strict):
    constraints: ShoppingConstraints | None = None
    message: Text | None = Field(None, description="Optional first user message: runs the first turn at once.")
    budget_ms: BudgetMs | None = None


class TurnRequest(_Strict):
    message: Text
    constraints: ShoppingConstraints | None = Field(None, description="Merged into the session's constraints.")
    budget_ms: BudgetMs | None = None


class ItemCard(BaseModel):
    item_id: str
    title: str
    price: float | None
    currency: str
    category: list[str]
    rating: float | None = None
    in_stock: bool = True
    sid: str | None = None


class TurnReply(BaseModel):
    session_id: str
    reply: str
    items: list[ItemCard] = Field(default_factory=list)
    bundles: list[list[ItemCard]] = Field(default_factory=list)
    actions: list[dict[str, Any]] = Field(default_factory=list)
    cart: dict[str, int] = Field(default_factory=dict)
    degraded: bool = False
    reason: str | None = Field(None, description="Why the reply is degraded (budget, step_limit, timeout, …).")
    latency_ms: float


class SessionView(BaseModel):
    session_id: str
    turns: int
    messages: int
    shown_items: list[str]
    cart: dict[str, int]
    constraints: dict[str, Any]


class AnswerRequest(_Strict):
    question: Text
    stream_id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    ts_offset_s: float | None = Field(None, ge=0, description="Seconds into the stream when the question was asked.")
    item_id: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    budget_ms: BudgetMs | None = None


class AnswerReply(BaseModel):
    answer: str
    cited_facts: list[str] = Field(default_factory=list)
    items: list[ItemCard] = Field(default_factory=list)
    degraded: bool = False
    reason: str | None = None
    latency_ms: float


class PlanRequest(_Strict):
    request: Text
    constraints: dict[str, Any] | None = Field(None, description="Travel constraints (city, day, start, end, …).")
    budget_ms: BudgetMs | None = None


class PlanReply(BaseModel):
    itinerary: dict[str, Any] | None = None
    reply: str
    degraded: bool = False
    reason: str | None = None
    latency_ms: float


# ------------------------------------------------------------------------------------------------ OpenAI-compatible
class ChatFunction(_Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    description: str = Field("", max_length=2000)
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool | None = None


class ChatTool(_Strict):
    type: Literal["function"]
    function: ChatFunction


class ChatToolCallFunction(BaseModel):
    name: str
    arguments: str


class ChatToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ChatToolCallFunction


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Annotated[str, StringConstraints(max_length=32_000)] | list[dict[str, Any]] | None = Field(
        None, description="Text, or OpenAI content parts (their text parts are used).")
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients send many optional fields we do not use

    model: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    tools: list[ChatTool] | None = Field(None, max_length=64)
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(None, ge=1, le=4096)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    n: int = Field(1, ge=1, le=1, description="Only n=1 is served.")
    budget_ms: BudgetMs | None = None
