"""Request and reply models of the REST API, one family per resource (frontend-facing: item cards, not tool calls)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

MAX_TEXT = 4000
"""Most characters in one user message."""
MAX_MESSAGES = 64
"""Most messages in one OpenAI-style request."""

Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT)]
BudgetMs = Annotated[float, Field(gt=0, le=120_000, description="Latency budget for this request, ms.")]


MAX_JSON_DEPTH = 32
"""Most levels of nesting in a free-form JSON object (``constraints``, tool ``parameters``)."""


def _json_safe(value: dict[str, Any]) -> dict[str, Any]:
    """Reject what the server could not copy or send back as JSON: nesting deeper than :data:`MAX_JSON_DEPTH`,
    NaN / Infinity numbers (Python's JSON reader accepts them), strings with lone surrogates."""
    stack: list[tuple[str, int, Any]] = [("", 1, value)]
    while stack:
        where, depth, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise ValueError(f"'{where}': numbers must be finite (not NaN or Infinity)")
        if isinstance(node, str) and not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"'{where}': not valid Unicode (a lone surrogate)") from None
        elif isinstance(node, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"'{where}': nested deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(node, list):
                stack.extend((f"{where}.{i}", depth + 1, v) for i, v in enumerate(node))
                continue
            for k, v in node.items():
                path = f"{where}.{k}" if where else str(k)
                stack.extend([(f"{path} (a key)", depth, k), (path, depth + 1, v)])
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_json_safe)]
"""A free-form JSON object whose numbers are finite and whose strings are valid Unicode."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ShoppingConstraints(_Strict):
    """Filters the frontend applies to every item the agent may show."""

    category: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = Field(
        None, max_length=8, description="Category path prefix, root first.")
    price_max: float | None = Field(None, ge=0)
    price_min: float | None = Field(None, ge=0)
    attributes: dict[Annotated[str, StringConstraints(min_length=1, max_length=64)],
                     Annotated[str, StringConstraints(max_length=200)]] | None = Field(None, max_length=16)
    in_stock: bool = True

    @model_validator(mode="after")
    def _price_range(self) -> ShoppingConstraints:
        if (problem := price_range_problem(self.as_dict())) is not None:
            raise ValueError(problem)
        return self

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


def price_range_problem(constraints: dict[str, Any]) -> str | None:
    """Why ``price_min`` / ``price_max`` let no item through, or None when they do (or are not both set)."""
    low, high = constraints.get("price_min"), constraints.get("price_max")
    if low is not None and high is not None and low > high:
        return f"price_min ({low:g}) is above price_max ({high:g}): no item can match"
    return None


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
    reason: str | None = Field(None, description="Why the reply is degraded (budget, step_limit, timeout, …), or "
                               "'sure': the app answered before any model call (not degraded); null: the model.")
    latency_ms: float


class CartAdd(_Strict):
    item_id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    quantity: int = Field(1, ge=1, le=99, description="Units to add (never more than the item's stock).")


class CartReply(BaseModel):
    session_id: str
    cart: dict[str, int]
    items: list[ItemCard] = Field(default_factory=list, description="The cart's items, in the cart's order.")
    total: float = Field(description="Sum of price x quantity over the cart.")


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
    reason: str | None = Field(None, description="Why the fallback answered (degraded: timeout, overload, no_model, "
                               "...), or 'sure': the app's reader answered what it read for certain, before any model "
                               "call (not degraded); null when the model answered.")
    latency_ms: float


class PlanRequest(_Strict):
    request: Text
    constraints: JsonObject | None = Field(None, description="Travel constraints (city, day, start, end, …).")
    budget_ms: BudgetMs | None = None


class StreamProduct(BaseModel):
    item_id: str
    title: str
    price: float | None
    currency: str
    start_s: int = Field(description="On screen from this second of the stream …")
    end_s: int = Field(description="… until this one (exclusive).")


class StreamView(BaseModel):
    stream_id: str
    title: str
    host: str
    duration_s: int
    products: list[StreamProduct]


class StreamList(BaseModel):
    streams: list[StreamView]


class PlanStop(BaseModel):
    poi_id: str
    name: str
    category: str
    group: str
    arrive_min: int = Field(description="Arrival, minutes after midnight.")
    depart_min: int = Field(description="Departure, minutes after midnight.")
    opens: int = Field(description="The place opens, minutes after midnight.")
    closes: int = Field(description="The place closes, minutes after midnight.")


class PlanLeg(BaseModel):
    from_poi: str
    to_poi: str
    mode: str
    depart_min: int
    arrive_min: int
    travel_min: float = Field(description="Minutes the journey takes (the rest of the gap is waiting).")


class PlanReply(BaseModel):
    itinerary: dict[str, Any] | None = None
    stops: list[PlanStop] = Field(default_factory=list, description="The itinerary's stops with their places.")
    legs: list[PlanLeg] = Field(default_factory=list, description="Travel between consecutive stops.")
    reply: str
    degraded: bool = False
    reason: str | None = Field(None, description="Why the reply is degraded (budget, no_model, timeout, …), or "
                               "'sure': the app answered before any model call (not degraded); null: the model.")
    latency_ms: float


# ------------------------------------------------------------------------------------------------ OpenAI-compatible
class ChatFunction(_Strict):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    description: str = Field("", max_length=2000)
    parameters: JsonObject = Field(default_factory=dict)
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
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Annotated[str, StringConstraints(max_length=32_000)] | list[JsonObject] | None = Field(
        None, description="Text, or OpenAI content parts (their text parts are used).")
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    # OpenAI clients send many optional fields we do not use
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    tools: list[ChatTool] | None = Field(None, max_length=64)
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(None, ge=1, le=4096)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1, description="Sampling seed (a 64-bit integer).")
    n: int = Field(1, ge=1, le=1, description="Only n=1 is served.")
    budget_ms: BudgetMs | None = None


# ------------------------------------------------------------------------------------------------ errors
class ErrorReply(BaseModel):
    """Every 4xx / 5xx body: ``detail`` says what is wrong (a message, or one entry per invalid field for 422)."""

    detail: str | list[dict[str, Any]]


class OpenAIErrorReply(ErrorReply):
    """The OpenAI routes' errors also carry OpenAI's ``error`` object (``message``, ``type``) its clients read."""

    error: dict[str, Any]
