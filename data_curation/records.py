"""The log contract: pseudonymous ``Session`` records made of ``Turn`` (text) and ``Event`` (behaviour)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

NonEmpty = Annotated[str, StringConstraints(min_length=1, max_length=256)]
App = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
"""An app's name as the app table (``apps/__init__.py``) lists it."""
EventType = Literal["search", "view", "click", "cart", "purchase", "rate"]
ITEM_EVENTS: frozenset[str] = frozenset({"view", "click", "cart", "purchase", "rate"})


class Turn(BaseModel):
    """One utterance in a session's conversation."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system"]
    text: str = Field(max_length=100_000)
    ts: float = Field(ge=0, description="Unix time in seconds.")


class Event(BaseModel):
    """One behavioural event. ``search`` carries ``query``; item events carry ``item_id``.

    ``rate`` (explicit rating, e.g. MovieLens) carries ``value``; ``purchase`` may carry ``order_id``.
    """

    model_config = ConfigDict(extra="forbid")

    type: EventType
    ts: float = Field(ge=0, description="Unix time in seconds.")
    item_id: NonEmpty | None = None
    query: str | None = Field(default=None, max_length=10_000)
    value: float | None = Field(default=None, description="Rating for `rate` events.")
    order_id: NonEmpty | None = None

    @model_validator(mode="after")
    def _fields_for_type(self) -> Event:
        if self.type in ITEM_EVENTS and self.item_id is None:
            raise ValueError(f"a '{self.type}' event needs item_id")
        if self.type == "search" and not self.query:
            raise ValueError("a 'search' event needs a non-empty query")
        if self.type == "rate" and self.value is None:
            raise ValueError("a 'rate' event needs value")
        return self


class Session(BaseModel):
    """One user's visit: what they said (turns) and did (events), in time order.

    ``user_id`` is pseudonymous after curation; raw worlds carry the shop's own customer ids.
    ``task_id`` links a session to the task it was generated from, where there is one.
    """

    model_config = ConfigDict(extra="forbid")

    session_id: NonEmpty
    user_id: NonEmpty
    app: App = "shopping"
    started_at: float = Field(ge=0, description="Unix time in seconds.")
    turns: list[Turn] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)
    task_id: NonEmpty | None = None

    @model_validator(mode="after")
    def _time_ordered(self) -> Session:
        for name, seq in (("turns", self.turns), ("events", self.events)):
            for i in range(1, len(seq)):
                if seq[i].ts < seq[i - 1].ts:
                    raise ValueError(f"{name}[{i}].ts goes back in time ({seq[i].ts} < {seq[i - 1].ts})")
        return self

    @property
    def has_outcome(self) -> bool:
        """True when the session ended in a cart or purchase (curation filters on this)."""
        return any(e.type in ("cart", "purchase") for e in self.events)
