"""Session / Turn / Event contracts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from data_curation.records import Event, Session, Turn


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"type": "view"}, "needs item_id"), ({"type": "search"}, "non-empty query"),
     ({"type": "search", "query": ""}, "non-empty query"), ({"type": "rate", "item_id": "a"}, "needs value"),
     ({"type": "teleport"}, "type"), ({"type": "view", "item_id": "a", "ts": -1}, "ts")],
)
def test_event_rules(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Event.model_validate({"ts": 1.0, **fields})


def test_session_is_time_ordered_and_knows_its_outcome() -> None:
    turns = [Turn(role="user", text="a", ts=5), Turn(role="assistant", text="b", ts=4)]
    with pytest.raises(ValidationError, match=r"turns\[1\]\.ts goes back in time"):
        Session(session_id="s", user_id="u", started_at=1, turns=turns)
    s = Session(session_id="s", user_id="u", started_at=1,
                events=[Event(type="view", item_id="a", ts=2), Event(type="cart", item_id="a", ts=3)])
    assert s.has_outcome and s.app == "shopping"
    assert not Session(session_id="s", user_id="u", started_at=1).has_outcome
