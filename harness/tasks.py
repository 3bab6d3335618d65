"""The task contract: an intent to fulfil, the constraints a good answer meets, and its ground truth."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

App = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
"""An app's name as the app table (``apps/__init__.py``) lists it; what each app needs of a task (a target,
an answer) its kit checks (``AppKit.check_task``)."""
NonEmpty = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system"]
    content: str = Field(max_length=100_000)


class Target(BaseModel):
    """Ground-truth items as slots; each slot lists the item ids that satisfy it.

    - ``single``: one slot with exactly one id (the item asked for);
    - ``set``: one slot, any of its ids is a correct answer (ids listed best first, may be capped);
    - ``bundle``: two or more slots, one item from each is needed.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["single", "set", "bundle"]
    slots: list[list[NonEmpty]] = Field(min_length=1)
    slot_names: list[str] = Field(default_factory=list, description="One label per slot (bundles).")

    @model_validator(mode="after")
    def _shape(self) -> Target:
        if any(len(s) == 0 for s in self.slots):
            raise ValueError("every slot needs at least one item id")
        if self.kind == "single" and (len(self.slots) != 1 or len(self.slots[0]) != 1):
            raise ValueError("a 'single' target has exactly one slot with one item id")
        if self.kind == "set" and len(self.slots) != 1:
            raise ValueError("a 'set' target has exactly one slot")
        if self.kind == "bundle" and len(self.slots) < 2:
            raise ValueError("a 'bundle' target has at least two slots")
        if self.slot_names and len(self.slot_names) != len(self.slots):
            raise ValueError("slot_names must name every slot")
        return self

    @property
    def item_ids(self) -> list[str]:
        """All acceptable ids, slot by slot, without repeats."""
        seen: dict[str, None] = {}
        for slot in self.slots:
            seen.update(dict.fromkeys(slot))
        return list(seen)


class Task(BaseModel):
    """An intent to fulfil.

    ``constraints`` are what a correct answer must satisfy, in app-specific keys (documented by each
    app's world module, e.g. shopping: ``category``, ``attributes``, ``price_max``, ``in_stock``).
    ``hidden`` holds constraints the user states only when asked (multi-turn clarification).
    Livestream tasks carry ``answer`` and the ``facts`` it rests on instead of a ``target``.
    """

    model_config = ConfigDict(extra="forbid")

    task_id: NonEmpty
    app: App
    kind: NonEmpty = Field(description="e.g. explicit, attribute, vague, bundle, multi_turn, question, plan")
    messages: list[Message] = Field(min_length=1)
    constraints: dict[str, Any] = Field(default_factory=dict)
    hidden: dict[str, Any] = Field(default_factory=dict)
    target: Target | None = None
    answer: str | None = None
    facts: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)
