"""Session state and stores: trimming, the in-memory LRU+TTL store, and RedisSessionStore against a real redis-server.

Run: .venv/bin/python -m pytest tests/harness/test_session.py -q            (fast tier)
     .venv/bin/python -m pytest tests/harness/test_session.py -q -m integration   (real redis-server)
"""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

import pytest

from harness import session as session_module
from harness.session import MemorySessionStore, RedisSessionStore, SessionError, SessionState


def msgs(*roles_texts: str) -> list[dict[str, Any]]:
    """``"user:hi"`` -> ``{"role": "user", "content": "hi"}``."""
    return [{"role": rt.split(":", 1)[0], "content": rt.split(":", 1)[1]} for rt in roles_texts]


class Clock:
    """A settable ``time.monotonic`` for TTL tests."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(session_module.time, "monotonic", c)
    return c


# --- SessionState.trim ---------------------------------------------------------------------------------------------


def test_trim_keeps_the_first_user_message_and_the_latest_ones() -> None:
    s = SessionState(
        app="shopping", messages=msgs("user:intent", *(f"assistant:a{i}" for i in range(5)), "user:latest"))
    s.trim(4)
    assert [m["content"] for m in s.messages] == ["intent", "a3", "a4", "latest"]


def test_trim_uses_the_whole_budget_when_the_first_user_message_is_recent() -> None:
    s = SessionState(
        app="shopping", messages=msgs("assistant:hello", "assistant:welcome", "tool:x", "user:intent", "assistant:a"))
    s.trim(3)
    assert [m["content"] for m in s.messages] == ["x", "intent", "a"]
    s = SessionState(
        app="shopping", messages=msgs("assistant:hello", "assistant:welcome", "user:intent", "assistant:a"))
    s.trim(3)
    assert [m["content"] for m in s.messages] == ["welcome", "intent", "a"]


def test_trim_without_a_user_message_keeps_the_latest_and_leaves_short_histories_alone() -> None:
    s = SessionState(app="shopping", messages=msgs("assistant:a", "assistant:b", "assistant:c"))
    s.trim(2)
    assert [m["content"] for m in s.messages] == ["b", "c"]
    s.trim(5)
    assert len(s.messages) == 2
    s = SessionState(
        app="shopping", messages=msgs("user:u", "assistant:a", "assistant:b"), shown_items=[f"i{k}" for k in range(9)])
    s.trim(1, max_shown=3)
    assert [m["content"] for m in s.messages] == ["b"] and s.shown_items == ["i6", "i7", "i8"]


def test_trim_rejects_a_budget_below_one() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        SessionState(app="shopping", messages=msgs("user:u")).trim(0)


# --- MemorySessionStore --------------------------------------------------------------------------------------------


def test_memory_store_round_trip_stores_a_copy() -> None:
    store = MemorySessionStore()
    s = SessionState(app="travel", messages=msgs("user:plan a trip"), cart={"a1": 2})
    store.put(s)
    s.messages.append({"role": "assistant", "content": "changed after put"})
    s.cart["a2"] = 1
    got = store.get(s.session_id)
    assert got is not None and got is not s
    assert got.messages == msgs("user:plan a trip") and got.cart == {"a1": 2} and got.app == "travel"
    got.turns = 9  # changing what get returned does not change the stored session either
    again = store.get(s.session_id)
    assert again is not None and again.turns == 0
    assert store.get("no-such-session") is None
    assert store.delete(s.session_id) and not store.delete(s.session_id) and store.get(s.session_id) is None


def test_memory_store_trims_on_put() -> None:
    store = MemorySessionStore(max_messages=3)
    s = SessionState(app="shopping", messages=msgs("user:intent", "assistant:a", "user:b", "assistant:c"))
    store.put(s)
    got = store.get(s.session_id)
    assert got is not None and [m["content"] for m in got.messages] == ["intent", "b", "c"]


def test_memory_store_expires_sessions_ttl_after_their_last_write(clock: Clock) -> None:
    store = MemorySessionStore(ttl_s=10)
    s = SessionState(app="shopping")
    store.put(s)
    clock.now += 8
    assert store.get(s.session_id) is not None  # a read does not extend the TTL ...
    store.put(s)  # ... a write does
    clock.now += 8
    assert store.get(s.session_id) is not None
    clock.now += 2.5
    assert store.get(s.session_id) is None
    assert len(store) == 0


def test_memory_store_len_does_not_count_expired_sessions(clock: Clock) -> None:
    store = MemorySessionStore(ttl_s=10)
    old, new = SessionState(app="shopping"), SessionState(app="shopping")
    store.put(old)
    clock.now += 6
    store.put(new)
    clock.now += 6
    assert len(store) == 1 and store.get(new.session_id) is not None


def test_memory_store_ttl_with_the_real_clock() -> None:
    store = MemorySessionStore(ttl_s=0.2)
    s = SessionState(app="shopping")
    store.put(s)
    assert store.get(s.session_id) is not None
    time.sleep(0.3)
    assert store.get(s.session_id) is None


def test_memory_store_evicts_the_least_recently_used_at_max_sessions() -> None:
    store = MemorySessionStore(max_sessions=3)
    a, b, c, d = (SessionState(app="shopping") for _ in range(4))
    for s in (a, b, c):
        store.put(s)
    assert store.get(a.session_id) is not None  # a is now the most recently used; b the least
    store.put(d)
    assert len(store) == 3
    assert store.get(b.session_id) is None
    assert all(store.get(s.session_id) is not None for s in (a, c, d))


def test_memory_store_validates_its_limits() -> None:
    for bad in ({"ttl_s": 0}, {"max_sessions": 0}, {"max_messages": 1}):
        with pytest.raises(ValueError):
            MemorySessionStore(**bad)


# --- RedisSessionStore against a real redis-server ------------------------------------------------------------------


@pytest.fixture
def prefix() -> str:
    """A fresh key prefix per test: tests share one server."""
    return f"test:{uuid.uuid4().hex[:8]}:"


@pytest.mark.integration
def test_redis_round_trip_trims_and_deletes(redis_url: str, prefix: str) -> None:
    store = RedisSessionStore(redis_url, prefix=prefix, max_messages=3)
    assert store.ping()
    s = SessionState(app="livestream", messages=msgs("user:intent", "assistant:a", "user:b", "assistant:c"),
                     shown_items=["a1"], cart={"a1": 1}, constraints={"max_price": 50})
    store.put(s)
    got = store.get(s.session_id)
    assert got is not None and got.model_dump() == s.model_dump()
    assert [m["content"] for m in got.messages] == ["intent", "b", "c"]
    assert store.get("missing") is None
    assert len(store) == 1
    assert store.delete(s.session_id) and not store.delete(s.session_id) and len(store) == 0


@pytest.mark.integration
def test_redis_sessions_expire_by_key_ttl(redis_url: str, prefix: str) -> None:
    store = RedisSessionStore(redis_url, prefix=prefix, ttl_s=1)
    s = SessionState(app="shopping")
    store.put(s)
    assert store.get(s.session_id) is not None
    time.sleep(1.5)
    assert store.get(s.session_id) is None


@pytest.mark.integration
def test_redis_ttl_keeps_sub_second_precision(redis_url: str, prefix: str) -> None:
    store = RedisSessionStore(redis_url, prefix=prefix, ttl_s=1.8)
    s = SessionState(app="shopping")
    store.put(s)
    ttl_ms = store._redis.pttl(prefix + s.session_id)
    assert 1500 < ttl_ms <= 1800, ttl_ms


@pytest.mark.integration
def test_two_replicas_share_sessions(redis_url: str, prefix: str) -> None:
    replica_a = RedisSessionStore(redis_url, prefix=prefix)
    replica_b = RedisSessionStore(redis_url, prefix=prefix)
    s = SessionState(app="shopping", messages=msgs("user:find boots"))
    replica_a.put(s)
    on_b = replica_b.get(s.session_id)
    assert on_b is not None and on_b.messages == s.messages
    on_b.messages.append({"role": "assistant", "content": "here are boots"})
    on_b.turns = 1
    replica_b.put(on_b)
    back_on_a = replica_a.get(s.session_id)
    assert back_on_a is not None and back_on_a.turns == 1 and len(back_on_a.messages) == 2


@pytest.mark.integration
def test_a_corrupt_session_is_a_session_error(redis_url: str, prefix: str) -> None:
    store = RedisSessionStore(redis_url, prefix=prefix)
    store._redis.set(prefix + "bad", b'{"turns": "many"}')
    with pytest.raises(SessionError, match="corrupt"):
        store.get("bad")


def test_unreachable_redis_is_a_session_error_not_a_hang() -> None:
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisSessionStore(f"redis://127.0.0.1:{port}/0", timeout_s=0.3)
    assert not store.ping()
    for call in (lambda: store.get("x"), lambda: store.put(SessionState(app="shopping")), lambda: store.delete("x"),
                 lambda: len(store)):
        with pytest.raises(SessionError, match="redis"):
            call()


def test_a_silent_redis_times_out_as_a_session_error() -> None:
    with socket.socket() as server:  # accepts connections (kernel backlog) but never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        store = RedisSessionStore(f"redis://127.0.0.1:{server.getsockname()[1]}/0", timeout_s=0.3)
        start = time.monotonic()
        with pytest.raises(SessionError, match="redis"):
            store.get("x")
        assert time.monotonic() - start < 3.0


def test_add_to_cart_never_passes_the_stock() -> None:
    from harness.catalog import Item

    state = SessionState(app="shopping")
    three = Item(item_id="a", title="A", category_path=["x"], price=5.0, stock=3)
    state.add_to_cart(three, 2)
    state.add_to_cart(three)
    assert state.cart == {"a": 3}
    with pytest.raises(ValueError, match=r"only 3 of a in stock \(3 already in the cart\)"):
        state.add_to_cart(three)
    with pytest.raises(ValueError, match="b is out of stock"):
        state.add_to_cart(Item(item_id="b", title="B", category_path=["x"], stock=0))
    untracked = Item(item_id="c", title="C", category_path=["x"])  # stock None: not tracked
    state.add_to_cart(untracked, 50)
    assert state.cart == {"a": 3, "c": 50}
